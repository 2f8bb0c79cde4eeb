"""Kubernetes attribution: which pod holds each GPU (kubelet PodResources) and runs each process (cgroups).

Attribution is a second source next to the backend, opt-in (``--kubernetes.pod-resources``,
``--kubernetes.process-pods``). It produces plain data (:mod:`nvidia_gpu_exporter.model.kubernetes`) that
the collector attaches to the published snapshot and the exposition renders; nothing here knows the
Prometheus text format. Only :mod:`.podresources` needs ``grpcio``/``protobuf`` (the ``kubernetes``
extra), and it imports them lazily, so the rest of the package (cgroup parsing, device ids, the doctor's
API client) works without them.
"""
