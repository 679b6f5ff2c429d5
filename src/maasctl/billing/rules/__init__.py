"""Billing's rules, pure: no process, no network, no database (an import contract holds them to it).

Each module decides from its inputs alone; the controller and the psp-connector read the cluster and the
databases, call these, and apply what they return (docs/billing.md, "Floor plan").
"""
