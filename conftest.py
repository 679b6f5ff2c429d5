"""The repository's pytest plugins, registered once for the whole run: the end-to-end stack and journey fixtures
(`e2e.fixtures`), so that `tests/` and `e2e/` share one stack per test process, and the order in which the
workers get the files (`tests.schedule`), which also stops a stack once its worker has no test left for it."""

pytest_plugins = ["e2e.fixtures", "tests.schedule"]
