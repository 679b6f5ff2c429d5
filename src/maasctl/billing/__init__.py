"""The billing operator (seed 002): price books, plans, tenants, budgets and reservations on maasctl's runtime.

Layout: ``api/`` (pydantic models of the seven kinds -> CRDs), ``money`` (decimal money), ``lifecycle``
(PriceBook state, pure), ``compile`` (Plan -> Kuadrant/Kueue objects, pure), ``identity`` (how a request
names its tenant), ``reconcilers/`` (thin: cache -> pure function -> apply -> status), ``app`` (the Manager
of ``maasctl billing run``). See docs/billing.md.
"""
