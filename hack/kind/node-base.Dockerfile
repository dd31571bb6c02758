# kind's base node image, rebuilt from a Debian rootfs (hack/kind/rootfs.sh) instead of
# kind's own Dockerfile (which clones and compiles containerd, runc, crictl and the CNI
# plugins from GitHub).  Debian's packages stand in: systemd, containerd, runc,
# containernetworking-plugins.  The build context (testplane/images.py) holds kind's
# images/base/files from the sigs.k8s.io/kind module at the version the project builds.
# Classic builder (DOCKER_BUILDKIT=0): docker 20.10's `import` cannot set STOPSIGNAL.
ARG ROOTFS
FROM ${ROOTFS}
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
RUN set -eu; \
    chmod 0755 /usr/local/bin/entrypoint /usr/local/bin/clean-install /kind /kind/bin /kind/bin/*; \
    find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete; \
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
          /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
          /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*; \
    echo "ReadKMsg=no" >> /etc/systemd/journald.conf; \
    ln -sf /usr/lib/systemd/systemd /sbin/init; \
    systemctl enable kubelet.service containerd.service undo-mount-hacks.service; \
    systemctl mask systemd-binfmt.service; \
    mkdir -p /etc/kubernetes/manifests /etc/cni/net.d /opt/cni; \
    ln -sf /usr/bin/containerd /usr/local/bin/containerd; \
    ln -sfn /usr/lib/cni /opt/cni/bin; \
    ctr oci spec \
      | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json; \
    sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml; \
    grep -q 'restrict_oom_score_adj = true' /etc/containerd/config.toml
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
