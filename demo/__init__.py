"""Demo agents and data: what ``make run`` shows without a model API key."""
