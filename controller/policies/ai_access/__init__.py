"""Seed 003 (AI data-flow access): the resource model, the access algorithms (ADGA, grouped
ADGA, least connections, IPVS weighted least connections, power of two choices) and migration
by load prediction, as pure code; the policy classes in :mod:`.policies`."""
