"""The billing pages of the console (issue 36, docs/billing-console.md): tenants, budgets, reservations,
connectors and metering health, by the signed-in user's billing role (`contract.billing_console`: IdP groups ->
admin / operator / viewer), read from the billing kinds' status as the user, and the billing operator's /metrics
for the rater. Every write (freeze, unfreeze) is checked against the role on the server, then made as the user.
"""
