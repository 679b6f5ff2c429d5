"""The security suite runs against the real local stack (control plane, controller, maas-api, gateway and test
models as separate processes, all over HTTP), through the same fixtures as the e2e journeys (`e2e.fixtures`,
registered for the whole run, so one stack serves them all)."""
