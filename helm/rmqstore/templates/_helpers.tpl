{{/* Everything the templates repeat: names, labels, image, store paths, one container. */}}

{{- define "rmqstore.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rmqstore.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rmqstore.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rmqstore.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rmqstore.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .broker }}
rmqstore.io/broker: {{ .name }}
{{- end }}
{{- end }}

{{/*
The broker groups (values.brokers): one a line, each {index, name}; a single {} for one broker
(its objects keep the names they had before brokers existed). The templates render each
broker's objects with a context of its own, (dict "Values" $.Values "Release" $.Release "Chart"
$.Chart "Capabilities" $.Capabilities "Template" $.Template "Files" $.Files "broker" BROKER)
(an include returns text, not a dict); the helpers below read .broker from it.
*/}}
{{- define "rmqstore.brokerList" -}}
{{- if gt (int .Values.brokers) 1 }}
{{- range $i := until (int .Values.brokers) }}
- {index: {{ $i }}, name: {{ printf "%s-broker-%d" (include "rmqstore.fullname" $) $i | trunc 52 | trimSuffix "-" }}}
{{- end }}
{{- else }}
- {}
{{- end }}
{{- end }}

{{/* A broker group's StatefulSet and client Service name: the fullname for one broker. */}}
{{- define "rmqstore.brokerFullname" -}}
{{- if .broker }}{{ .broker.name }}{{ else }}{{ include "rmqstore.fullname" . }}{{ end -}}
{{- end }}

{{/* The name the broker registers under (--broker-name of the remoting broker, the proxy and
the query service): remoting.brokerName (with several brokers, suffixed -<index>), else its
StatefulSet's name. */}}
{{- define "rmqstore.brokerName" -}}
{{- if and .broker .Values.remoting.brokerName }}{{ printf "%s-%d" .Values.remoting.brokerName (int .broker.index) }}
{{- else if .broker }}{{ .broker.name }}
{{- else }}{{ default (include "rmqstore.fullname" .) .Values.remoting.brokerName }}{{ end -}}
{{- end }}

{{- define "rmqstore.labels" -}}
helm.sh/chart: {{ include "rmqstore.chart" . }}
{{ include "rmqstore.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rmqstore
{{- end }}

{{- define "rmqstore.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rmqstore.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rmqstore.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "rmqstore.headlessName" -}}
{{- printf "%s-headless" (include "rmqstore.brokerFullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The store root inside every container. */}}
{{- define "rmqstore.storeRoot" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.storeMountPath) .Values.storeSubdir }}
{{- end }}

{{/* Builders and query reach the writer inside the pod. */}}
{{- define "rmqstore.writerAddress" -}}
{{- printf "127.0.0.1:%d" (int .Values.commitlog.grpcPort) }}
{{- end }}

{{/* Index file shape flags, shared by the index builder and the query service (none for a
read-only store: the query service reads the shape from its index files). */}}
{{- define "rmqstore.indexFileArgs" -}}
{{- if .Values.readOnly }}
[]
{{- else }}
- --index-slots
- {{ printf "%d" (int64 .Values.indexFile.slots) | quote }}
- --index-entries
- {{ printf "%d" (int64 .Values.indexFile.entries) | quote }}
{{- end }}
{{- end }}

{{- define "rmqstore.metricsPort" -}}
{{- if .root.Values.metrics.enabled }}{{ .svc.metricsPort | int }}{{ else }}0{{ end }}
{{- end }}

{{/* The components that run, in pod order: name, values key, port name suffix. */}}
{{- define "rmqstore.components" -}}
- {name: commitlog, key: commitlog, short: writer}
{{- if and .Values.consumeQueue.enabled (not .Values.readOnly) }}
- {name: consume-queue, key: consumeQueue, short: cq}
{{- end }}
{{- if and .Values.index.enabled (not .Values.readOnly) }}
- {name: index, key: index, short: index}
{{- end }}
{{- if .Values.query.enabled }}
- {name: query, key: query, short: query}
{{- end }}
{{- if and .Values.proxy.enabled (not .Values.readOnly) }}
- {name: proxy, key: proxy, short: proxy, public: true}
{{- end }}
{{- if include "rmqstore.remotingRuns" . }}
- {name: remoting, key: remoting, short: remote, public: true, remoting: true}
{{- end }}
{{- end }}

{{/* Whether the pod runs the RocketMQ 4.x remoting broker (none for a read-only store). */}}
{{- define "rmqstore.remotingRuns" -}}
{{- if and .Values.remoting.enabled (not .Values.readOnly) }}true{{ end -}}
{{- end }}

{{/* The name servers the remoting broker registers with: remoting.namesrv, else each pod of
the chart's by its DNS name (a broker registers with every name server); none without either. */}}
{{- define "rmqstore.namesrvAddress" -}}
{{- if .Values.remoting.namesrv }}{{ .Values.remoting.namesrv }}
{{- else if .Values.namesrv.enabled }}
{{- $pods := list }}
{{- range $i := until (int .Values.namesrv.replicas) }}
{{- $pods = append $pods (printf "%s-%d.%s.%s.svc:%d" (include "rmqstore.namesrvName" $) $i (include "rmqstore.namesrvHeadlessName" $) $.Release.Namespace (int $.Values.namesrv.port)) }}
{{- end }}
{{- join ";" $pods }}
{{- end }}
{{- end }}

{{/* The address 4.x clients reach the broker at: remoting.brokerIp, else the pod's IP. */}}
{{- define "rmqstore.brokerIp" -}}
{{- default "$(POD_IP)" .Values.remoting.brokerIp -}}
{{- end }}

{{- define "rmqstore.namesrvName" -}}
{{- printf "%s-namesrv" (include "rmqstore.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rmqstore.namesrvHeadlessName" -}}
{{- printf "%s-namesrv-headless" (include "rmqstore.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name server's pods: a name of their own, so no selector of the broker's matches them. */}}
{{- define "rmqstore.namesrvSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-namesrv" (include "rmqstore.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: namesrv
{{- end }}

{{- define "rmqstore.namesrvLabels" -}}
helm.sh/chart: {{ include "rmqstore.chart" . }}
{{ include "rmqstore.namesrvSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rmqstore
{{- end }}

{{/*
The remoting broker's command when the broker has slaves: only the master pod
(replication.master, pod 0 by default) registers with the name
servers (the remoting broker registers as brokerId 0, the master; a slave registering too
would replace the master's address in the routes). On a slave it listens unregistered and
its writer refuses sends, naming the master.
*/}}
{{- define "rmqstore.remotingRoleCommand" -}}
{{- include "rmqstore.masterRegistersCommand" (dict "root" . "name" "remoting") }}
{{- end }}

{{/* The same for a service that announces itself in the name servers' KV configuration (the
proxy and the query service of a broker in a cluster): only the master pod is given --namesrv, so a
slave never replaces its master's entry. Call with (dict "root" $ "name" CONTAINER). */}}
{{- define "rmqstore.masterRegistersCommand" -}}
- sh
- -c
- >-
  if [ "${POD_NAME##*-}" = {{ include "rmqstore.masterOrdinal" .root }} ];
  then exec python "$@" --namesrv {{ include "rmqstore.namesrvAddress" .root | quote }};
  else exec python "$@"; fi
- {{ .name }}
{{- end }}

{{/* A cluster member's announcement: --namesrv on its args, or with slaves the command that
gives it on the master pod only. Call with (dict "root" $ "container" DICT); changes DICT. */}}
{{- define "rmqstore.announce" -}}
{{- $c := .container }}
{{- if include "rmqstore.replicated" .root }}
{{- $_ := set $c "command" (include "rmqstore.masterRegistersCommand" (dict "root" .root "name" $c.name) | fromYamlArray) }}
{{- else }}
{{- $_ := set $c "args" (concat $c.args (list "--namesrv" (include "rmqstore.namesrvAddress" .root))) }}
{{- end }}
{{- end }}

{{/* securityContext of every container (hardened; see values.securityContext). */}}
{{- define "rmqstore.securityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* Native gRPC probes against the container's health service (tcpProbe: a TCP check, for
the remoting protocol's services, which serve no gRPC health service). */}}
{{- define "rmqstore.probes" -}}
{{- $p := .root.Values.probes -}}
{{- $check := ternary "tcpSocket" "grpc" (or .root.Values.tls.enabled (not (not .tcpProbe))) -}}
{{- $port := .port | default .svc.grpcPort -}}
startupProbe:
  {{ $check }}:
    port: {{ $port }}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
  timeoutSeconds: {{ $p.startup.timeoutSeconds }}
livenessProbe:
  {{ $check }}:
    port: {{ $port }}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
readinessProbe:
  {{ $check }}:
    port: {{ $port }}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
{{- end }}

{{/*
One service container. Call with (dict "root" $ "name" NAME "short" PORTNAME "svc" VALUES
"args" LIST "readOnly" BOOL "accessKey" BOOL "command" LIST "extraPorts" LIST);
accessKey: mount the proxy's secret key; topics: mount values.topics (the writer); command: instead of [python] (then POD_NAME is set);
extraPorts: more container ports; port, portName: the service port instead of svc.grpcPort
and grpc-SHORT; tcpProbe: probe it over TCP; stateless: no store volume and no TLS (the name
server).
*/}}
{{- define "rmqstore.container" -}}
{{- $root := .root -}}
- name: {{ .name }}
  image: {{ include "rmqstore.image" $root | quote }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  command: {{ .command | default (list "python") | toJson }}
  args:
    {{- toYaml .args | nindent 4 }}
    {{- with .svc.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: {{ .portName | default (printf "grpc-%s" .short) }}
      containerPort: {{ .port | default .svc.grpcPort }}
      protocol: TCP
    {{- if $root.Values.metrics.enabled }}
    - name: metrics-{{ .short }}
      containerPort: {{ .svc.metricsPort }}
      protocol: TCP
    {{- end }}
    {{- with .extraPorts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- if .command }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- end }}
    - name: PYTHONUNBUFFERED
      value: "1"
    - name: PYTHONDONTWRITEBYTECODE
      value: "1"
    {{- if and $root.Values.tls.enabled (not .stateless) }}
    - name: RMQSTORE_TLS_CERT
      value: /etc/rmqstore/tls/tls.crt
    - name: RMQSTORE_TLS_KEY
      value: /etc/rmqstore/tls/tls.key
    - name: RMQSTORE_TLS_CA
      value: /etc/rmqstore/tls/ca.crt
    {{- with $root.Values.tls.serverName }}
    - name: RMQSTORE_TLS_SERVER_NAME
      value: {{ . | quote }}
    {{- end }}
    {{- end }}
    {{- with $root.Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- include "rmqstore.probes" . | nindent 2 }}
  resources:
    {{- toYaml .svc.resources | nindent 4 }}
  securityContext:
    {{- include "rmqstore.securityContext" $root | nindent 4 }}
  volumeMounts:
    {{- if not .stateless }}
    - name: data
      mountPath: {{ $root.Values.storeMountPath }}
      {{- if .readOnly }}
      readOnly: true
      {{- end }}
    {{- end }}
    - name: tmp
      mountPath: /tmp
    {{- if and $root.Values.tls.enabled (not .stateless) }}
    - name: tls
      mountPath: /etc/rmqstore/tls
      readOnly: true
    {{- end }}
    {{- if .topics }}
    - name: topics
      mountPath: {{ dir (include "rmqstore.topicsFile" $root) }}
      readOnly: true
    {{- end }}
    {{- if and .accessKey (include "rmqstore.accessKeys" $root) }}
    - name: access-key
      mountPath: /etc/rmqstore/access-key
      readOnly: true
    {{- end }}
    {{- if .acl }}
    - name: remoting-acl
      mountPath: /etc/rmqstore/acl
      readOnly: true
    {{- end }}
{{- end }}

{{/* Claim of the broker's master pod (pod 0 unless replication.master moved it): the rebuild Job's default. */}}
{{- define "rmqstore.claimName" -}}
{{- default (printf "data-%s" (include "rmqstore.masterPod" .)) .Values.rebuild.existingClaim }}
{{- end }}

{{/* Whether the proxy requires signed calls (proxy.accessKey, with its secret's Secret). */}}
{{- define "rmqstore.accessKeys" -}}
{{- if and .Values.proxy.enabled (not .Values.readOnly) .Values.proxy.accessKey -}}
{{- if not .Values.proxy.secretKeySecret }}{{ fail "proxy.accessKey needs proxy.secretKeySecret (a Secret holding the secret key)" }}{{ end -}}
true
{{- end -}}
{{- end }}

{{/* The proxy's secret key as a file: the access-key volume, mounted here. */}}
{{- define "rmqstore.secretKeyFile" -}}
/etc/rmqstore/access-key/secret-key
{{- end }}

{{/* --access-key and --secret-key-file of the proxy and of the console that calls it. */}}
{{- define "rmqstore.accessKeyArgs" -}}
- --access-key
- {{ .Values.proxy.accessKey | quote }}
- --secret-key-file
- {{ include "rmqstore.secretKeyFile" . }}
{{- end }}

{{/* The writer's put socket, in the /tmp volume every container of the pod mounts. */}}
{{- define "rmqstore.putSocket" -}}
/tmp/rmqstore-put.sock
{{- end }}

{{/* Whether the broker has slaves (replication.slaves > 0): then its pods are replicas. */}}
{{- define "rmqstore.replicated" -}}
{{- if gt (int .Values.replication.slaves) 0 }}true{{ end -}}
{{- end }}

{{/* Pods of the StatefulSet: the master and its slaves (none when replicas is 0). */}}
{{- define "rmqstore.pods" -}}
{{- if gt (int .Values.replicas) 0 }}{{ add 1 (int .Values.replication.slaves) }}{{ else }}0{{ end -}}
{{- end }}

{{/* The master's ordinal in the broker's StatefulSet: replication.master, one number for
every broker or a list of one per broker (by index); 0 unless a switchover moved it. */}}
{{- define "rmqstore.masterOrdinal" -}}
{{- $m := .Values.replication.master -}}
{{- if kindIs "slice" $m -}}
{{- if ne (len $m) (int .Values.brokers) }}
{{- fail (printf "replication.master lists %d ordinal(s): give one per broker (brokers is %d), or one number for all" (len $m) (int .Values.brokers)) }}
{{- end -}}
{{- $i := 0 -}}
{{- if .broker }}{{ $i = int .broker.index }}{{ end -}}
{{- $m = index $m $i -}}
{{- end -}}
{{- if gt (int $m) (int .Values.replication.slaves) }}
{{- fail (printf "replication.master is %d, but the broker's pods are 0..%d (replication.slaves is %d)" (int $m) (int .Values.replication.slaves) (int .Values.replication.slaves)) }}
{{- end -}}
{{- int $m -}}
{{- end }}

{{/* The master pod's name (the label Kubernetes gives every StatefulSet pod). */}}
{{- define "rmqstore.masterPod" -}}
{{- printf "%s-%s" (include "rmqstore.brokerFullname" .) (include "rmqstore.masterOrdinal" .) }}
{{- end }}

{{/* A pod of the broker through the headless Service, at PORT: (list $ ORDINAL PORT). */}}
{{- define "rmqstore.podAddress" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%v.%s.%s.svc:%d" (include "rmqstore.brokerFullname" $) (index . 1) (include "rmqstore.headlessName" $) $.Release.Namespace (int (index . 2)) }}
{{- end }}

{{/* Where a slave finds its master's HA port: the master pod through the headless Service. */}}
{{- define "rmqstore.haMaster" -}}
{{- include "rmqstore.podAddress" (list . (include "rmqstore.masterOrdinal" .) .Values.replication.haPort) }}
{{- end }}

{{/*
The writer's command when the broker has slaves: a shell picks the role by the pod's ordinal
(replication.master: the master, taking slaves on haPort; any other: a slave of it, checking
its history against the master's writer before following) and execs python with the
container's args and the role's flags. Every pod's writer is given the other pods' writers
as --ha-peers: one started as the master that finds a master of a later term among them (a
pod promoted by hand) starts as its slave instead (docs/replication.md, "On Kubernetes").
The peers are ordinals 0..16 (replication.slaves is at most 16 in values.schema.json), not
the pods there are, so that scaling the slaves restarts no running pod; a pod that does not
exist does not resolve and is skipped at once.
*/}}
{{- define "rmqstore.writerRoleCommand" -}}
{{- $role := ternary "sync_master" "async_master" (eq .Values.replication.mode "sync") -}}
{{- $master := include "rmqstore.masterOrdinal" . -}}
{{- $writer := include "rmqstore.podAddress" (list . "$i" .Values.commitlog.grpcPort) -}}
- sh
- -c
- >-
  o="${POD_NAME##*-}"; peers="";
  for i in {{ range until 17 }}{{ . }} {{ end }}; do
  [ "$i" = "$o" ] || peers="${peers:+$peers,}{{ $writer }}"; done;
  if [ "$o" = {{ $master }} ];
  then exec python "$@" --role {{ $role }} --ha-port {{ int .Values.replication.haPort }} --ha-peers "$peers";
  else exec python "$@" --role slave --ha-port {{ int .Values.replication.haPort }} --ha-master {{ include "rmqstore.haMaster" . }}
  --ha-master-commitlog {{ include "rmqstore.podAddress" (list . $master .Values.commitlog.grpcPort) }} --ha-peers "$peers"; fi
- writer
{{- end }}

{{/* values.topics, one ConfigMap every broker's writer reads at start (--topics-file). */}}
{{- define "rmqstore.topicsName" -}}
{{- printf "%s-topics" (include "rmqstore.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rmqstore.topicsFile" -}}
/etc/rmqstore/topics/topics.json
{{- end }}
