"""The MaaS controllers: one reconciler per kind, wired by `setup.setup_controllers`."""
