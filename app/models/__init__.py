"""Model files: provisioning of the demo pair."""
