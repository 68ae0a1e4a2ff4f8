#!/usr/bin/env python3
"""Writes tests/fixtures/envoy-gateway/schemas/<tag>/*.json from Envoy Gateway's own CRDs.

    scripts/eg-crd-schemas.py <envoyproxy/gateway git dir> <tag>...

For each tag, each CRD the kit uses (EnvoyProxy, EnvoyExtensionPolicy, EnvoyPatchPolicy) is read
from the release (`git show <tag>:charts/gateway-helm/charts/crds/crds/generated/...`), and its
openAPIV3Schema is cut down mechanically to the fields the kit writes (KEEP below; a subtree
kept whole is EG's schema for it, enums and patterns included), with `additionalProperties:
false` on every object that lists its properties, so a field EG does not have (a misspelling,
or csrf in 1.8's filterOrder enum) fails instead of being pruned away silently by the API server.
The result records the CRD's path and git blob id. Run it again when a release is added; the
tests (tests/envoy_gateway.rs) need only its output.
"""
import json
import subprocess
import sys

import yaml

CRDS = {
    "envoyproxy": "gateway.envoyproxy.io_envoyproxies.yaml",
    "envoyextensionpolicy": "gateway.envoyproxy.io_envoyextensionpolicies.yaml",
    "envoypatchpolicy": "gateway.envoyproxy.io_envoypatchpolicies.yaml",
}
DIR = "charts/gateway-helm/charts/crds/crds/generated"
WHOLE = True
META = {"name": WHOLE, "namespace": WHOLE}
KEEP = {
    "envoyproxy": {
        "apiVersion": WHOLE,
        "kind": WHOLE,
        "metadata": META,
        "spec": {
            "mergeType": WHOLE,
            "dynamicModules": WHOLE,
            "filterOrder": WHOLE,
            "shutdown": WHOLE,
            "bootstrap": WHOLE,
            "provider": {
                "type": WHOLE,
                "kubernetes": {
                    "envoyDeployment": {
                        "pod": {"volumes": WHOLE},
                        "container": {"env": WHOLE, "volumeMounts": WHOLE},
                        "initContainers": WHOLE,
                        "patch": WHOLE,
                    }
                },
            },
        },
    },
    "envoyextensionpolicy": {
        "apiVersion": WHOLE,
        "kind": WHOLE,
        "metadata": META,
        "spec": {"targetRefs": WHOLE, "dynamicModule": WHOLE},
    },
    "envoypatchpolicy": {
        "apiVersion": WHOLE,
        "kind": WHOLE,
        "metadata": META,
        "spec": WHOLE,
    },
}


def closed(schema):
    """`additionalProperties: false` wherever properties are listed (and unknown fields are not
    explicitly preserved)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            schema["additionalProperties"] = False
        for v in schema.values():
            closed(v)
    elif isinstance(schema, list):
        for v in schema:
            closed(v)
    return schema


def cut(schema, keep):
    if keep is WHOLE:
        return closed(schema)
    if keep is META:
        # A CRD leaves metadata to the API server's ObjectMeta: the kit's objects name themselves.
        return {
            "type": "object",
            "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        }
    if schema.get("type") == "array":
        schema["items"] = cut(schema["items"], keep)
        return schema
    props = schema.get("properties", {})
    missing = [k for k in keep if k not in props]
    if missing:
        sys.exit(f"not in the CRD: {missing}")
    schema["properties"] = {k: cut(props[k], v) for k, v in keep.items()}
    schema["additionalProperties"] = False
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r in keep]
    # CEL rules may name fields that were cut; jsonschema does not run them anyway.
    schema.pop("x-kubernetes-validations", None)
    return schema


def main():
    git_dir, tags = sys.argv[1], sys.argv[2:]
    for tag in tags:
        for kind, file in CRDS.items():
            path = f"{DIR}/{file}"
            text = subprocess.run(
                ["git", "-C", git_dir, "show", f"{tag}:{path}"], check=True, capture_output=True, text=True
            ).stdout
            blob = subprocess.run(
                ["git", "-C", git_dir, "rev-parse", f"{tag}:{path}"], check=True, capture_output=True, text=True
            ).stdout.strip()
            crd = yaml.safe_load(text)
            (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
            schema = cut(version["schema"]["openAPIV3Schema"], KEEP[kind])
            schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
            schema["title"] = f"{crd['spec']['names']['kind']} (gateway.envoyproxy.io/v1alpha1), Envoy Gateway {tag}"
            schema["$comment"] = (
                f"Cut from envoyproxy/gateway {tag}:{path} (blob {blob}) by scripts/eg-crd-schemas.py: "
                "only the fields the graceful-drain kit writes, each with EG's own schema, closed to "
                "unknown fields."
            )
            out = f"tests/fixtures/envoy-gateway/schemas/{tag}/{kind}.json"
            with open(out, "w") as f:
                json.dump(schema, f, indent=1, sort_keys=True)
                f.write("\n")
            print(out)


if __name__ == "__main__":
    main()
