"""The integration tier: real journal files, real processes and signals, the real PostgreSQL
server (the root conftest starts it once per session), the dashboard under Pilot."""
