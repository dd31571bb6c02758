#!/bin/sh
# flux-plunger uninstall clean-up: stop the controller, then release every uninstall fence.
#
# The chart runs this as its pre-delete hook Job; it also runs by hand (controller/
# uninstall-cleanup.sh is the same file), e.g. before deleting a kustomize install:
#
#   NAMESPACE=flux-plunger ./controller/uninstall-cleanup.sh
#
# 1. Scale Deployment $NAMESPACE/$DEPLOYMENT to zero.  Nothing touches a HelmRelease before
#    that has succeeded: a running flux-plunger could fence again behind the sweep.
# 2. Wait up to $POD_WAIT seconds for its pods ($POD_SELECTOR) to go (their own drain
#    releases what it can inside the grace period).
# 3. Run `kubectl-flux_plunger release-fence $HR_SCOPE [ARGS...]`: its report lines and exit
#    status are this script's (0 only when every fence was released).
# 4. If a pod was still there, list the fenced releases again; any found fails the script.
#
# Environment: NAMESPACE (required), DEPLOYMENT (flux-plunger), POD_SELECTOR
# (app.kubernetes.io/name=flux-plunger), POD_WAIT (100), RETRY_WINDOW (60: seconds kubectl
# reads and the scale are retried), HR_SCOPE (--all-namespaces), KUBECTL (kubectl),
# FLUX_PLUNGER (kubectl-flux_plunger).  Connection: in-cluster, or $KUBECONFIG.
# Exit: 0 all fences released; 1 otherwise (a failed pre-delete hook makes Helm keep the
# release and helm-controller retry the uninstall, hook included).
set -u

ns=${NAMESPACE:-}
if [ -z "$ns" ]; then
    echo "error: NAMESPACE must name the namespace of the flux-plunger Deployment" >&2
    exit 1
fi
deploy=${DEPLOYMENT:-flux-plunger}
selector=${POD_SELECTOR:-app.kubernetes.io/name=flux-plunger}
pod_wait=${POD_WAIT:-100}
window=${RETRY_WINDOW:-60}
scope=${HR_SCOPE:---all-namespaces}
kubectl=${KUBECTL:-kubectl}
plunger=${FLUX_PLUNGER:-kubectl-flux_plunger}

until=$(( $(date +%s) + window ))

# retry CMD...: run until it succeeds or the window closes (at least once), 2s apart;
# prints only the successful attempt's stdout; failures' stderr stays in the log.
retry() {
    while :; do
        if out=$("$@"); then
            [ -z "$out" ] || printf '%s\n' "$out"
            return 0
        fi
        [ "$(date +%s)" -lt "$until" ] || return 1
        sleep 2
    done
}

# 1. stop the controller
if ! found=$(retry "$kubectl" -n "$ns" get deployment "$deploy" --ignore-not-found -o name); then
    echo "error: could not read Deployment $ns/$deploy; no fence was touched" >&2
    exit 1
fi
if [ -z "$found" ]; then
    echo "no Deployment $ns/$deploy; nothing to stop"
elif retry "$kubectl" -n "$ns" scale deployment "$deploy" --replicas=0 >/dev/null; then
    echo "scaled Deployment $ns/$deploy to zero"
else
    echo "error: could not scale Deployment $ns/$deploy to zero; no fence was touched" >&2
    exit 1
fi

# 2. wait for its pods to go
pods_gone=yes
if ! "$kubectl" -n "$ns" wait --for=delete pod --selector "$selector" \
        --timeout="${pod_wait}s" >/dev/null 2>&1; then  # its timeout noise: we report below
    if ! left=$(retry "$kubectl" -n "$ns" get pod --selector "$selector" -o name); then
        echo "warning: could not tell whether flux-plunger pods are still running; releasing anyway" >&2
        pods_gone=no
    elif [ -n "$left" ]; then
        echo "warning: flux-plunger pods are still running, releasing anyway:" $left >&2
        pods_gone=no
    fi
fi

# 3. release every fence: release-fence's own report and exit status
# shellcheck disable=SC2086 # HR_SCOPE is words, e.g. "-n team-a"
"$plunger" release-fence $scope "$@"
rc=$?

# 4. a pod that did not go may have fenced a release behind the sweep
if [ "$pods_gone" = no ]; then
    # shellcheck disable=SC2086
    if ! again=$("$plunger" release-fence $scope --dry-run=client); then
        echo "error: could not list fenced HelmReleases again after the sweep" >&2
        exit 1
    fi
    refs=$(printf '%s\n' "$again" | sed -n 's/^would release the uninstall fence from //p')
    for ref in $refs; do
        echo "NOT released $ref: fenced after the sweep; a flux-plunger is still running" >&2
        rc=1
    done
fi
exit "$rc"
