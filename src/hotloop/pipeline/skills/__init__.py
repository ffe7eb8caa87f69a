"""The Skills API's skills (docs/skills.md): `Skills` (service.py), which the API and the code runtime call."""
