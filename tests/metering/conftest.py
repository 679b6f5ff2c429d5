"""Metering tests run against the real local stack over HTTP, through the same fixtures as the e2e journeys
(`e2e.fixtures`, registered for the whole run, so one stack serves them all)."""
