"""maas-api's routers, one module per resource: keys, subscriptions, models, the gateway's internal
callbacks, and health/metrics. Usage metering has its own package (`maasctl.maasapi.usage`)."""
