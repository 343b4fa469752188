"""Versioned system evidence profiles (``evidence/*.yaml``)."""

from harness.evidence.profile import EvidenceProfile, load_profile, profile_path

__all__ = ["EvidenceProfile", "load_profile", "profile_path"]
