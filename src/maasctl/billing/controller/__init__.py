"""The billing controller, `maasctl billing run`: its wiring (`app`), the reconcilers, the rater and the GPU
meter that write the ledger, and re-rating (`rerate`, run by `maasctl billing rerate`).
"""
