"""A tiny OpenAI-compatible model server for tests, e2e journeys and `maasctl dev` samples."""

from maasctl.testmodel.server import ModelServerConfig, create_app

__all__ = ["ModelServerConfig", "create_app"]
