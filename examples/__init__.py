"""Example agents the guides in docs/ walk through; the tests run them, so the guides stay true."""
