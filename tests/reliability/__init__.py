"""Reliability and security suites: crashes, torn tails, full disks, hostile input, fuzzing."""
