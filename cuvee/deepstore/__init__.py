"""deepstore."""
