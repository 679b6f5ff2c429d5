"""The billing part of `maasctl dev`: the dev stack's billing (`stack`) and its sample objects (`samples`)."""
