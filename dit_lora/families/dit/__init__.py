"""The dit family: everything about this model lives in this folder."""
