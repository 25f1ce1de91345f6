"""Authentication and authorisation: SASL mechanisms, ACLs."""
