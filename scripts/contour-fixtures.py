#!/usr/bin/env python3
"""Writes tests/fixtures/contour/<tag>/ from Contour's own repository.

    scripts/contour-fixtures.py <projectcontour/contour git dir> <tag>

03-envoy.yaml is examples/contour/03-envoy.yaml at the tag, as it is (the Envoy DaemonSet of
Contour's example install; examples/render/contour.yaml, the release's one-file manifest, holds
the same DaemonSet). bootstrap.json, sds/xds-tls-certificate.json and
sds/xds-validation-context.json are what `contour bootstrap` writes with the example's TLS and
resources-dir flags, as Contour's own test expects them: the wantedBootstrapConfig,
wantedTLSCertificateConfig and wantedValidationContextConfig of the case below in
internal/envoy/v3/bootstrap_test.go, as they are (Contour's test fills in testing-ns for the
namespace, 127.0.0.1 for the xDS address and relative file names; tests/contour.rs puts in the
example's values, checking each one it replaces). Prints each file's sha256 for SOURCES.
"""
import hashlib
import os
import subprocess
import sys

CASE = '"--resources-dir tmp --envoy-cafile=CA.cert --envoy-client-cert=client.cert --envoy-client-key=client.key": {'


def show(git_dir, tag, path):
    return subprocess.run(
        ["git", "-C", git_dir, "show", f"{tag}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def main():
    git_dir, tag = sys.argv[1], sys.argv[2]
    out = f"tests/fixtures/contour/{tag}"
    with open(f"{out}/03-envoy.yaml", "w") as f:
        f.write(show(git_dir, tag, "examples/contour/03-envoy.yaml"))
    test = show(git_dir, tag, "internal/envoy/v3/bootstrap_test.go")
    at = test.index(CASE)
    os.makedirs(f"{out}/sds", exist_ok=True)
    for field, name in [
        ("wantedBootstrapConfig", "bootstrap.json"),
        ("wantedTLSCertificateConfig", "sds/xds-tls-certificate.json"),
        ("wantedValidationContextConfig", "sds/xds-validation-context.json"),
    ]:
        start = test.index(f"{field}: `", at) + len(f"{field}: `")
        end = test.index("`", start)
        text = test[start:end] + "\n"
        with open(f"{out}/{name}", "w") as f:
            f.write(text)
        print(hashlib.sha256(text.encode()).hexdigest(), f"{tag}/{name}")


if __name__ == "__main__":
    main()
