// Validate Kubernetes objects (JSON lines on stdin) against Karpenter's v1 API models
// (npm @kubernetes-models/karpenter, pinned in package-lock.json). Prints one JSON line per
// object: {"kind", "name", "errors": [...]} (errors empty when it validates).
import { createInterface } from "node:readline";
import { NodePool } from "@kubernetes-models/karpenter/karpenter.sh/v1/NodePool";
import { EC2NodeClass } from "@kubernetes-models/karpenter/karpenter.k8s.aws/v1/EC2NodeClass";

const MODELS = {
  "karpenter.sh/v1/NodePool": NodePool,
  "karpenter.k8s.aws/v1/EC2NodeClass": EC2NodeClass,
};

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const obj = JSON.parse(line);
  const key = `${obj.apiVersion}/${obj.kind}`;
  const Model = MODELS[key];
  let errors = [];
  if (!Model) {
    errors = [`no Karpenter model for ${key}`];
  } else {
    try {
      new Model(obj).validate();
    } catch (err) {
      errors = (err.errors || [{ message: String(err) }]).map(
        (e) => `${e.instancePath || "/"} ${e.message || ""}`.trim(),
      );
    }
  }
  console.log(JSON.stringify({ kind: obj.kind, name: obj.metadata?.name ?? "", errors }));
}
