"""States and the calculations on them."""
