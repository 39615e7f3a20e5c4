"""Tests of the process starter: real child processes, no services but Azurite."""
