"""Input formats: parsing and validating run files into records and token arrays."""
