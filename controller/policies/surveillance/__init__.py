"""surveillance, load balancing for video surveillance (``../shared/spec/004-surveillance-load-
balancing.md``): node load and weights (:mod:`.load`), the balancers with stream sharing and
cascades (:mod:`.balancer`), the paper's test as a simulation (:mod:`.model`) and the
balancers as controller policies (:mod:`.policies`)."""

from controller.policies.surveillance.policies import SURVEILLANCE_POLICIES

POLICIES = {policy.name: policy for policy in SURVEILLANCE_POLICIES}
