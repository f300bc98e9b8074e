"""dispatch's agents: the regional dispatch centers and their back-to-source lookup."""

ROLES = {"dispatch": "a regional dispatch center placing streams and looking them up"}
