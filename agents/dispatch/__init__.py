"""dispatch's agents: the regional dispatch centers and their back-to-source lookup."""
