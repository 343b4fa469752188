"""Schedule composition (1F1B / interleaved) and memory."""
