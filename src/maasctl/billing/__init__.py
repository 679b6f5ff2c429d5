"""The billing operator (seed 002): price books, plans, tenants, budgets and reservations on maasctl's runtime.

Floor plan (top to bottom; a folder imports only from the ones below it, and `controller` and `connector` never
from each other: the billing layers contract in pyproject.toml):

- ``cli/``: argument parsing of every `maasctl billing ...` command; ``dev/``: the billing part of `maasctl dev`.
- ``controller/``: the billing controller process, `maasctl billing run` (its wiring, reconcilers, the rater and
  the GPU meter); ``connector/``: the psp-connector process, `maasctl billing connector` (its controllers, the
  webhook receiver, the providers, the payment book).
- ``ledger/``: the billing database (the money, the bookkeeping beside it, their migrations).
- ``rules/``: every decision, pure (no process, no network, no database).
- ``api/``: pydantic models of the seven kinds (the source of their CRDs) and the kinds billing reads and writes.
- ``money``: decimal money, the unit of every amount (the CRD schemas' amounts included).

See docs/billing.md ("Floor plan").
"""
