"""ai_access, AI data-flow access (``../shared/spec/003-ai-dataflow-access.md``): the resource
model (:mod:`.resources`), the access algorithms ADGA, improved ADGA, least connections, IPVS
wlc and power of two choices (:mod:`.access`), migration by load prediction (:mod:`.migration`),
the cluster as a fluid model (:mod:`.model`) and the policies (:mod:`.policies`)."""

from controller.policies.ai_access.policies import AI_ACCESS_POLICIES

POLICIES = {policy.name: policy for policy in AI_ACCESS_POLICIES}
