"""Test Hugging Face Hub-compatible server and the generator of the small test model."""
