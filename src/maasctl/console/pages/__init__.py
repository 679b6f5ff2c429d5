"""Page routers, one module per area of the console (see `maasctl.console.nav`)."""
