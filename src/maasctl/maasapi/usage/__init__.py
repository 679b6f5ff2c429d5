"""Usage metering in maas-api: ingestion of gateway usage records, rollups, reports and CSV export.

Records are append-only because billing (decimal money, rated from usage records) builds on them later: the
raw row of a request is written once and never updated (a database trigger refuses UPDATE; only the
retention purge deletes), and everything the gateway reports is kept (tokens of every kind, charged tokens,
status, latency, route, streaming). Hourly, daily and monthly rollups are added to in the same transaction,
so a batch is stored completely or not at all and reports read rollups only.

Ingestion (`POST /internal/v1/usage`, body `{"records": [...]}` with the gateway's snake_case `UsageRecord` fields)
is authenticated with the gateway's shared bearer token (`gateway_tokens`, see `maasapi.gatewayauth`; several may
be configured to rotate). Chosen over a ServiceAccount token + TokenReview because the local data plane (`maasctl
gateway` on a laptop) has no ServiceAccount to present, because it costs no API-server round trip per batch and
needs no extra RBAC, and because one Secret mounted into both Deployments is all a cluster needs. Without a
configured token ingestion is refused (401), never open.

Idempotency: `request_id` (a uuid4 the gateway makes per request) is the primary key; a retried batch is
stored once (`duplicates` in the answer). Bounds: at most `usage_max_batch_records` records
(413 `batch_too_large`) and `max_body_bytes` of body (413 `request_too_large`); schema errors are 400
`invalid_request` naming `records.<index>.<field>`; records timestamped more than an hour ahead are 400
`timestamp_in_future`; a database failure is 503 `usage_store_unavailable` (the gateway keeps and retries).

Organization id: stored as sent. The gateway fills it from the selected subscription's `organization.id`,
else its `tokenMetadata.organizationId` (as the MaaSSubscription reference says), from the subscription
that the select callback returned.

Resolution: reports have hour resolution (ranges are widened to whole UTC hours); exports group by UTC day
or month over whole UTC days. Retention: raw records `usage_raw_retention` (90 days), hourly rollups
`usage_hourly_retention` (400 days), daily and monthly rollups are kept; purge with
`POST /internal/v1/usage/purge` (admin, e.g. from a CronJob).
"""
