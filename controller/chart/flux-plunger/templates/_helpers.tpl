{{/* Every name is the install's: the release name (with "-flux-plunger" appended unless
it already holds it; fullnameOverride replaces it), so two installs (two shards, one per
helm-controller shard) never share a Deployment, ServiceAccount, Role, ClusterRole or
Lease.  The release "flux-plunger" keeps the names "flux-plunger" (and the contract's
Lease). */}}
{{- define "flux-plunger.name" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "flux-plunger" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-flux-plunger" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{/* The name of what is not confined to the release namespace — the ClusterRole and
ClusterRoleBinding (with watchNamespace: the Role and RoleBinding there, which installs from
other namespaces may share): the release namespace, then the install's name, so the same
release name installed in two namespaces never collides.  The kustomize base names them
the same way (flux-plunger-flux-plunger). */}}
{{- define "flux-plunger.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "flux-plunger.name" .) -}}
{{- end -}}
{{- define "flux-plunger.hookName" -}}{{ include "flux-plunger.name" . }}-uninstall-cleanup{{- end -}}

{{/* The HelmReleases this install watches: `selector`, else the shard's
sharding.fluxcd.io/key=<shard> (Flux's sharding label), else every one. */}}
{{- define "flux-plunger.selector" -}}
{{- if .Values.selector -}}
{{- .Values.selector -}}
{{- else if .Values.shard -}}
{{- printf "sharding.fluxcd.io/key=%s" .Values.shard -}}
{{- end -}}
{{- end -}}

{{/* serve --leader-election-id: leaderElectionID, else derived from the name and the
shard (unique per install in a namespace); the release "flux-plunger" without a shard keeps
the contract's flux-plunger.cozystack.io. */}}
{{- define "flux-plunger.leaseName" -}}
{{- if .Values.leaderElectionID -}}
{{- .Values.leaderElectionID -}}
{{- else -}}
{{- $id := include "flux-plunger.name" . -}}
{{- if .Values.shard -}}
{{- $s := .Values.shard | lower | replace "_" "-" | trimAll "-." -}}
{{- if not (hasSuffix (printf "-%s" $s) $id) -}}
{{- $id = printf "%s-%s" $id $s -}}
{{- end -}}
{{- end -}}
{{- if eq $id "flux-plunger" -}}
flux-plunger.cozystack.io
{{- else -}}
{{- printf "%s.flux-plunger.cozystack.io" $id -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "flux-plunger.selectorLabels" -}}
app.kubernetes.io/name: flux-plunger
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "flux-plunger.labels" -}}
{{ include "flux-plunger.selectorLabels" . }}
app.kubernetes.io/part-of: flux-plunger
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- /* a chart from an OCIRepository (Flux chartRef) has version X.Y.Z+<digest>: no "+" in a label */}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "flux-plunger.image" -}}
{{- $i := .Values.image -}}
{{- $tag := $i.tag | default .Chart.AppVersion -}}
{{- with $i.registry }}{{ trimSuffix "/" . }}/{{ end -}}
{{- printf "%s:%s" $i.repository $tag -}}
{{- with $i.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* shutdownGracePeriodSeconds, validated: a whole number of seconds in 40..140. */}}
{{- define "flux-plunger.grace" -}}
{{- $g := .Values.shutdownGracePeriodSeconds -}}
{{- if or (kindIs "invalid" $g) (kindIs "bool" $g) (kindIs "map" $g) (kindIs "slice" $g) -}}
{{- fail (printf "shutdownGracePeriodSeconds must be a whole number of seconds, got %v" $g) -}}
{{- end -}}
{{- if ne (toString (int64 $g)) (toString $g) -}}
{{- fail (printf "shutdownGracePeriodSeconds must be a whole number of seconds (terminationGracePeriodSeconds takes an integer), got %v" $g) -}}
{{- end -}}
{{- if or (lt (int64 $g) 40) (gt (int64 $g) 140) -}}
{{- fail (printf "shutdownGracePeriodSeconds must be between 40 and 140, got %v: below, the drain gets no time after the controller's 10s stop; above, the uninstall hook cannot wait the pod out inside its deadline" $g) -}}
{{- end -}}
{{- int64 $g -}}
{{- end -}}
