{{/* Names are fixed: one flux-plunger per cluster (a second one would be a second writer),
and the uninstall hook's Role names the Deployment. */}}
{{- define "flux-plunger.name" -}}flux-plunger{{- end -}}
{{- define "flux-plunger.hookName" -}}flux-plunger-uninstall-cleanup{{- end -}}

{{- define "flux-plunger.selectorLabels" -}}
app.kubernetes.io/name: flux-plunger
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "flux-plunger.labels" -}}
{{ include "flux-plunger.selectorLabels" . }}
app.kubernetes.io/part-of: flux-plunger
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
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
