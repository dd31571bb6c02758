"""Type names for what the package passes around: Kubernetes objects as the parsed JSON the
apiserver returns.  Nothing here checks a shape; readers still treat every field as optional."""

from __future__ import annotations

from typing import Any, TypeAlias

Obj: TypeAlias = dict[str, Any]
"""One object (or any JSON mapping inside one): a HelmRelease, a Secret, a Lease, a patch."""
