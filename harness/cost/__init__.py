"""Cost views over a PortablePlanIR."""
