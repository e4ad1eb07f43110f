{{/* Names, labels and the sidecar's command line. */}}

{{- define "deltakv.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's object names: "<release>-<chart>", or the release name when it holds the
chart's name already. */}}
{{- define "deltakv.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "deltakv.selectorLabels" -}}
app.kubernetes.io/name: {{ include "deltakv.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "deltakv.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "deltakv.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The Secret that holds the bearer token: the named one, or the chart's own. */}}
{{- define "deltakv.tokenSecretName" -}}
{{- if .Values.token.existingSecret -}}
{{- .Values.token.existingSecret -}}
{{- else -}}
{{- printf "%s-token" (include "deltakv.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "deltakv.tokenFile" -}}
{{- printf "%s/%s" .Values.token.mountPath .Values.token.key -}}
{{- end -}}

{{- define "deltakv.sidecarImage" -}}
{{- $repo := required "sidecar.image.repository is required: an image with the deltakv binary" .Values.sidecar.image.repository -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.sidecar.image.tag) -}}
{{- end -}}

{{- define "deltakv.engineImage" -}}
{{- $repo := required "engine.image.repository is required: the inference server's image" .Values.engine.image.repository -}}
{{- if .Values.engine.image.tag -}}
{{- printf "%s:%s" $repo .Values.engine.image.tag -}}
{{- else -}}
{{- $repo -}}
{{- end -}}
{{- end -}}

{{/* The arguments of `deltakv sidecar`: the chart's flags, then sidecar.extraArgs, none of
which may repeat a flag of the chart's or be --token (the token comes from the Secret). */}}
{{- define "deltakv.sidecarArgs" -}}
{{- $chartArgs := include "deltakv.chartSidecarArgs" . -}}
{{- $taken := list -}}
{{- range fromYamlArray $chartArgs -}}
{{- $taken = append $taken (first (splitList "=" .)) -}}
{{- end -}}
{{- $chartArgs }}
{{- range .Values.sidecar.extraArgs }}
{{- $flag := first (splitList "=" .) }}
{{- if eq $flag "--token" }}
{{- fail "sidecar.extraArgs: --token is refused: the sidecar reads the token from the Secret's file (token.*)" }}
{{- else if has $flag (list "--group" "--node" "--group-members" "--etcd-endpoints" "--group-prepare-timeout-ms" "--group-in-doubt-timeout-ms" "--group-commit-margin-ms" "--group-report-timeout-ms" "--group-decision-poll-ms" "--topology" "--peer-url" "--group-token-file") }}
{{- fail (printf "sidecar.extraArgs: %s is refused: the group comes from multiNode.* (group, node, members, etcdEndpoints, prepareTimeoutMs, inDoubtTimeoutMs, commitMarginMs, reportTimeoutMs, decisionPollMs, topology, peerUrl, groupTokenSecret)" $flag) }}
{{- else if has $flag $taken }}
{{- fail (printf "sidecar.extraArgs: %s is set by the chart: use the chart's value for it" $flag) }}
{{- end }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The chart's own `deltakv sidecar` flags, one per list item, each `--flag=value`. */}}
{{- define "deltakv.chartSidecarArgs" -}}
{{- $s := .Values.sidecar -}}
- sidecar
- {{ printf "--listen=0.0.0.0:%v" $s.port | quote }}
- {{ printf "--token-file=%s" (include "deltakv.tokenFile" .) | quote }}
- {{ printf "--shm-name=%s" $s.shmName | quote }}
- {{ printf "--state-dir=%s" .Values.state.mountPath | quote }}
- {{ printf "--decode-threads=%v" (int64 $s.decodeThreads) | quote }}
- {{ printf "--plan-buffer-bytes=%v" (int64 $s.planBufferBytes) | quote }}
- {{ printf "--max-body-bytes=%v" (int64 $s.maxBodyBytes) | quote }}
- {{ printf "--log-format=%s" $s.logFormat | quote }}
- {{ printf "--shutdown-timeout-s=%v" (int64 $s.shutdownTimeoutSeconds) | quote }}
{{- with $s.volumeStore }}
- {{ printf "--volume-store=%s" . | quote }}
{{- end }}
{{- with $s.servingCores }}
- {{ printf "--serving-cores=%s" . | quote }}
{{- end }}
{{- with $s.decoder }}
- {{ printf "--decoder=%s" . | quote }}
{{- end }}
{{- with .Values.deltaStore }}
- {{ printf "--http-timeout=%v" (int64 .timeoutSeconds) | quote }}
- {{ printf "--http-total-timeout=%v" (int64 .totalTimeoutSeconds) | quote }}
- {{ printf "--http-attempts=%v" (int64 .attempts) | quote }}
{{- if .caSecret.name }}
- {{ printf "--http-ca-file=/etc/deltakv/ca/%s" .caSecret.key | quote }}
{{- end }}
{{- end }}
{{- with .Values.verify }}
{{- if and .checkpoint .checkpointSecret.name }}
{{- fail "verify.checkpoint and verify.checkpointSecret.name exclude each other" }}
{{- end }}
{{- if .checkpointSecret.name }}
- "--verify-checkpoint=$(DELTAKV_VERIFY_CHECKPOINT)"
{{- else if .checkpoint }}
- {{ printf "--verify-checkpoint=%s" .checkpoint | quote }}
{{- end }}
{{- if .scrubIntervalSeconds }}
- {{ printf "--scrub-interval-s=%v" .scrubIntervalSeconds | quote }}
{{- end }}
{{- if .scrubRateGbps }}
- {{ printf "--scrub-rate-gbps=%v" .scrubRateGbps | quote }}
{{- end }}
{{- end }}
{{- if .Values.kvPool.enabled }}
{{- with .Values.kvPool }}
{{- if not .blockBytes }}
{{- fail "kvPool.blockBytes is required when kvPool.enabled (the engine's KV bytes per block)" }}
{{- end }}
- {{ printf "--kv-block-bytes=%v" (int64 .blockBytes) | quote }}
{{- if and .capacitySlots .hostFraction }}
{{- fail "kvPool: give capacitySlots or hostFraction, not both" }}
{{- else if .capacitySlots }}
- {{ printf "--kv-capacity-slots=%v" (int64 .capacitySlots) | quote }}
{{- else if .hostFraction }}
- {{ printf "--kv-host-fraction=%v" .hostFraction | quote }}
{{- else }}
{{- fail "kvPool: capacitySlots or hostFraction is required when kvPool.enabled" }}
{{- end }}
{{- if .hugepages }}
- "--kv-hugepages"
{{- end }}
{{- if ne (toString .numaNode) "" }}
- {{ printf "--kv-numa-node=%v" .numaNode | quote }}
{{- end }}
{{- if .gpuPciBusId }}
{{- if ne (toString .numaNode) "auto" }}
{{- fail "kvPool.gpuPciBusId is used with kvPool.numaNode: auto" }}
{{- end }}
- {{ printf "--kv-gpu-pci-bus-id=%s" .gpuPciBusId | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.multiNode }}
{{- if .group }}
- {{ printf "--group=%s" .group | quote }}
- {{ printf "--node=%s" .node | quote }}
- {{ printf "--group-members=%s" (join "," .members) | quote }}
{{- if not (kindIs "invalid" .prepareTimeoutMs) }}
- {{ printf "--group-prepare-timeout-ms=%v" (int64 .prepareTimeoutMs) | quote }}
{{- end }}
{{- if not (kindIs "invalid" .inDoubtTimeoutMs) }}
- {{ printf "--group-in-doubt-timeout-ms=%v" (int64 .inDoubtTimeoutMs) | quote }}
{{- end }}
{{- if not (kindIs "invalid" .commitMarginMs) }}
- {{ printf "--group-commit-margin-ms=%v" (int64 .commitMarginMs) | quote }}
{{- end }}
{{- if not (kindIs "invalid" .reportTimeoutMs) }}
- {{ printf "--group-report-timeout-ms=%v" (int64 .reportTimeoutMs) | quote }}
{{- end }}
{{- if not (kindIs "invalid" .decisionPollMs) }}
- {{ printf "--group-decision-poll-ms=%v" (int64 .decisionPollMs) | quote }}
{{- end }}
{{- if .topology }}
- {{ printf "--topology=%s" (include "deltakv.topologyFile" $) | quote }}
{{- end }}
{{- if .peerUrl }}
- {{ printf "--peer-url=%s" .peerUrl | quote }}
{{- else }}
- {{ printf "--peer-url=http://$(POD_IP):%v" (int64 $.Values.sidecar.port) | quote }}
{{- end }}
{{- if .groupTokenSecret.name }}
- {{ printf "--group-token-file=%s" (include "deltakv.groupTokenFile" $) | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}


{{/* A Kubernetes quantity ("34Gi", "500m", "2", 8) as a float (bytes, or CPUs); "" for forms
this does not read (exponents), which then skip the checks that use it. */}}
{{- define "deltakv.quantity" -}}
{{- if kindIs "string" . -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $suffix := trimPrefix $num . -}}
{{- $units := dict "" 1 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 -}}
{{- if and $num (hasKey $units $suffix) -}}
{{- mulf (float64 $num) (get $units $suffix) -}}
{{- end -}}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- float64 . -}}
{{- end -}}
{{- end -}}

{{/* Bytes as "N.N GiB", for messages. */}}
{{- define "deltakv.gib" -}}
{{- printf "%.1f GiB" (divf . 1073741824) -}}
{{- end -}}

{{/* The least bytes of a pool of kvPool.capacitySlots slots (slot data only: a slot is the
block rounded up to 64 bytes, or to 4096 from 4096 on; the pool's metadata comes on top); 0
when the pool is sized by hostFraction or disabled. */}}
{{- define "deltakv.poolBytes" -}}
{{- $kv := .Values.kvPool -}}
{{- if and $kv.enabled $kv.capacitySlots $kv.blockBytes -}}
{{- $b := int64 $kv.blockBytes -}}
{{- $align := ternary 64 4096 (lt $b 4096) -}}
{{- mulf (mul (div (add $b (sub $align 1)) $align) $align) (float64 $kv.capacitySlots) -}}
{{- else -}}
0
{{- end -}}
{{- end -}}

{{/* Render-time checks of values that fit the schema but not each other. */}}
{{- define "deltakv.validate" -}}
{{- if and .Values.token.existingSecret .Values.token.value -}}
{{- fail "token.value and token.existingSecret exclude each other" -}}
{{- end -}}
{{- $chartEnv := list -}}
{{- range fromYamlArray (include "deltakv.engineEnv" .) -}}
{{- $chartEnv = append $chartEnv .name -}}
{{- end -}}
{{- range .Values.engine.env -}}
{{- if has .name $chartEnv -}}
{{- fail (printf "engine.env: %s is set by the chart (from sidecar.shmName, sidecar.port or token.*)" .name) -}}
{{- end -}}
{{- end -}}
{{- if le (int64 .Values.terminationGracePeriodSeconds) (int64 .Values.sidecar.shutdownTimeoutSeconds) -}}
{{- fail (printf "terminationGracePeriodSeconds %v must be above sidecar.shutdownTimeoutSeconds %v: the kubelet kills the sidecar at the end of the grace period, before the running job had its shutdown timeout to end" (int64 .Values.terminationGracePeriodSeconds) (int64 .Values.sidecar.shutdownTimeoutSeconds)) -}}
{{- end -}}
{{- include "deltakv.validateMultiNode" . -}}
{{- $pool := float64 (include "deltakv.poolBytes" .) -}}
{{- if gt $pool 0.0 -}}
{{- $shm := include "deltakv.quantity" .Values.shm.sizeLimit -}}
{{- if and $shm (gt $pool (float64 $shm)) -}}
{{- fail (printf "kvPool: %v slots of %v bytes need at least %s of /dev/shm, more than shm.sizeLimit %v" (int64 .Values.kvPool.capacitySlots) (int64 .Values.kvPool.blockBytes) (include "deltakv.gib" $pool) .Values.shm.sizeLimit) -}}
{{- end -}}
{{- $mem := include "deltakv.quantity" (dig "limits" "memory" "" .Values.sidecar.resources) -}}
{{- if and $mem (gt $pool (float64 $mem)) -}}
{{- fail (printf "kvPool: the pool's pages (at least %s) are charged to the sidecar, more than its memory limit %v (sidecar.resources.limits.memory)" (include "deltakv.gib" $pool) .Values.sidecar.resources.limits.memory) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* multiNode: a group needs its node, its members (the node among them) and etcd; one
release is one node, so one replica. The sidecar checks the same at start (docs/MULTINODE.md). */}}
{{- define "deltakv.validateMultiNode" -}}
{{- $m := .Values.multiNode -}}
{{- $set := list -}}
{{- $unset := list -}}
{{- range $key := list "group" "node" "members" -}}
{{- if get $m $key -}}
{{- $set = append $set $key -}}
{{- else -}}
{{- $unset = append $unset $key -}}
{{- end -}}
{{- end -}}
{{- if and $set $unset -}}
{{- fail (printf "multiNode: group, node and members go together (%s set, %s not): set all three for a multi-node group, none for a single node" (join ", " $set) (join ", " $unset)) -}}
{{- end -}}
{{- if $m.group -}}
{{- if not (has $m.node $m.members) -}}
{{- fail (printf "multiNode.node %q is not among multiNode.members [%s]" $m.node (join ", " $m.members)) -}}
{{- end -}}
{{- if not $m.etcdEndpoints -}}
{{- fail "multiNode.etcdEndpoints is required with multiNode.group: the group's decisions are kept in etcd" -}}
{{- end -}}
{{- if gt (int64 .Values.replicaCount) 1 -}}
{{- fail (printf "multiNode.group: replicaCount %v, but a release is one node of the group (multiNode.node): install one release per node, with replicaCount 1" (int64 .Values.replicaCount)) -}}
{{- end -}}
{{- if not (or $m.groupTokenSecret.name .Values.token.existingSecret) -}}
{{- fail "multiNode.group: the sidecars of the group call each other (/v1/peer/) with a group token that every node must hold, and no token source is shared: name an existing Secret in multiNode.groupTokenSecret (mounted as --group-token-file), or give every release the same token.existingSecret (without --group-token-file the sidecar's own token is the group token); a Secret made from token.value belongs to one release" -}}
{{- end -}}
{{- with $m.topology -}}
{{- $nodes := keys .nodes | sortAlpha -}}
{{- if not (has $m.node $nodes) -}}
{{- fail (printf "multiNode.topology: its nodes [%s] do not include multiNode.node %q: every member serves ranks of the topology" (join ", " $nodes) $m.node) -}}
{{- end -}}
{{- $members := $m.members | sortAlpha -}}
{{- if ne (join "," $nodes) (join "," $members) -}}
{{- fail (printf "multiNode.topology: its nodes [%s] must be multiNode.members [%s], no more and no fewer" (join ", " $nodes) (join ", " $members)) -}}
{{- end -}}
{{- if ne (int64 .world) (mul (int64 .tp) (int64 .pp)) -}}
{{- fail (printf "multiNode.topology: world %v must equal tp * pp (%v * %v)" (int64 .world) (int64 .tp) (int64 .pp)) -}}
{{- end -}}
{{- end -}}
{{- if not $m.peerUrl -}}
{{- range .Values.sidecar.env -}}
{{- if eq .name "POD_IP" -}}
{{- fail "sidecar.env: POD_IP is set by the chart (the default peer URL, http://$(POD_IP):<sidecar.port>, without multiNode.peerUrl)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- range $key := list "prepareTimeoutMs" "inDoubtTimeoutMs" "commitMarginMs" "reportTimeoutMs" "decisionPollMs" -}}
{{- if not (kindIs "invalid" (index $m $key)) -}}
{{- fail (printf "multiNode.%s is used with multiNode.group" $key) -}}
{{- end -}}
{{- end -}}
{{- if $m.topology -}}
{{- fail "multiNode.topology is used with multiNode.group: the topology describes the ranks of a group's nodes" -}}
{{- end -}}
{{- if $m.peerUrl -}}
{{- fail "multiNode.peerUrl is used with multiNode.group: only a group's sidecars call each other" -}}
{{- end -}}
{{- if $m.groupTokenSecret.name -}}
{{- fail "multiNode.groupTokenSecret is used with multiNode.group: only a group's sidecars call each other" -}}
{{- end -}}
{{- end -}}
{{- if $m.etcdEndpoints -}}
{{- range .Values.sidecar.env -}}
{{- if eq .name "DELTAKV_ETCD_ENDPOINTS" -}}
{{- fail "sidecar.env: DELTAKV_ETCD_ENDPOINTS is set by the chart (from multiNode.etcdEndpoints)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Environment the chart gives the engine container, ahead of engine.env: where the
sidecar's shared memory and API are. */}}
{{- define "deltakv.engineEnv" -}}
- name: DELTAKV_SHM_NAME
  value: {{ .Values.sidecar.shmName | quote }}
- name: DELTAKV_KV_POOL
  value: {{ printf "%s.kv" .Values.sidecar.shmName | quote }}
- name: DELTAKV_SIDECAR_URL
  value: {{ printf "http://127.0.0.1:%v" (int64 .Values.sidecar.port) | quote }}
{{- if .Values.token.mountInEngine }}
- name: DELTAKV_TOKEN_FILE
  value: {{ include "deltakv.tokenFile" . | quote }}
{{- end }}
{{- end -}}

{{/* Where the sidecar finds the topology (from the multinode ConfigMap) and the group token. */}}
{{- define "deltakv.topologyFile" -}}
/etc/deltakv/multinode/topology.json
{{- end -}}

{{- define "deltakv.groupTokenFile" -}}
{{- printf "/etc/deltakv/group-token/%s" .Values.multiNode.groupTokenSecret.key -}}
{{- end -}}

{{/* The multinode ConfigMap is rendered for the etcd endpoints or the topology. */}}
{{- define "deltakv.multiNodeConfigMap" -}}
{{- if or .Values.multiNode.etcdEndpoints .Values.multiNode.topology -}}
true
{{- end -}}
{{- end -}}

{{- define "deltakv.multiNodeConfigMapName" -}}
{{- printf "%s-multinode" (include "deltakv.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The token file's mode: group-readable for fsGroup, else readable by any user of the pod
(the pod is the trust boundary; a non-root user is not the file's owner, root). */}}
{{- define "deltakv.tokenFileMode" -}}
{{- if (.Values.podSecurityContext | default dict).fsGroup -}}
288
{{- else -}}
292
{{- end -}}
{{- end -}}
