"""The nightly regression: certify every selected registry model, summarize, diff against history."""
