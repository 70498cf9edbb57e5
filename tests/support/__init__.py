"""What the test suite's fixtures are built from: real servers to test against."""
