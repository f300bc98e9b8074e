"""ai_access's agents: the AI terminals, the access servers' receiving ports and the GPU servers."""
