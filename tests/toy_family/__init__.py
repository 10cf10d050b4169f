"""A model family that lives entirely in this test folder (issue 26)."""
