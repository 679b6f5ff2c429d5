"""The billing reconcilers: read the cache, call a pure function, apply, report (conditions + Events)."""
