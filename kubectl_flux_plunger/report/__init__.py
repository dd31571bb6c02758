"""What the operator is told: Kubernetes Events (``events``) and Flux notifications
through notification-controller (``notify``)."""
