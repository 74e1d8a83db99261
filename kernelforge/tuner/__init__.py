"""Tuning above the runtime: `measure` times every build candidate on a GPU (`kernelforge tune`),
`tables` publishes and imports the resulting tables; the runtime only reads them."""
