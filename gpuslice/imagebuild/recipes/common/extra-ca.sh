#!/bin/sh
# Trust the extra CA bundle (build option; the file may be empty) system-wide and for pip,
# whatever the base image is: gpuslice/base already trusts it, a registry base does not.
set -eu
ca=/tmp/gpuslice/extra-ca.crt
if [ -s "$ca" ]; then
    mkdir -p /usr/local/share/ca-certificates
    cp "$ca" /usr/local/share/ca-certificates/gpuslice-extra.crt
    # Quiet: update-ca-certificates warns about every multi-certificate bundle file.
    update-ca-certificates > /dev/null 2>&1 || cat "$ca" >> /etc/ssl/certs/ca-certificates.crt
    if ! grep -qs '^cert' /etc/pip.conf; then
        printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >> /etc/pip.conf
    fi
fi
