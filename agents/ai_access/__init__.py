"""ai_access's agents: the AI terminals, the access servers' receiving ports and the GPU servers."""

ROLES = {
    "access": "an access server receiving AI data units from terminals",
    "gpu": "a GPU server processing the units the access servers hand over",
}
