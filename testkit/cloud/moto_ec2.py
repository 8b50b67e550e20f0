"""moto's AWS server on 127.0.0.1, behind a wrapper for what moto cannot do.

moto runs EC2 and SSM for real (instances, tags, filters, states); the wrapper in front of
it answers what moto never does: capacity, quota and throttling errors on ``RunInstances``
(queued by the test, matched by instance type, zone and market), and SSM parameters under
``/aws`` (moto refuses them). It records every request by its action, and ``RunInstances``'
parameters in full, since moto ignores ``ClientToken``, network-interface tags and the
launch settings (IMDSv2, shutdown behaviour) that the tests assert.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

REGION = "us-east-1"
ACCOUNT = "123456789012"
#: HTTP status of each injected error, as EC2 answers them.
STATUS = {
    "InsufficientInstanceCapacity": 500,
    "VcpuLimitExceeded": 400,
    "MaxSpotInstanceCountExceeded": 400,
    "RequestLimitExceeded": 503,
    "InvalidAMIID.NotFound": 400,
    "UnauthorizedOperation": 403,
}


@dataclass
class Injected:
    code: str
    instance_type: str = ""
    """Matches every type when empty."""
    zone_subnet: str = ""
    market: str = ""
    """``spot``, ``on-demand`` or empty (both)."""
    times: int = 1_000_000


@dataclass
class Recorded:
    action: str
    params: dict[str, str]
    at: float
    answered: int = 0


def _error_xml(code: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
        f"<Code>{code}</Code><Message>injected {code} (test wrapper)</Message>"
        "</Error></Errors><RequestID>00000000-0000-0000-0000-000000000000</RequestID>"
        "</Response>"
    ).encode()


def market_of(params: dict[str, str]) -> str:
    return "spot" if params.get("InstanceMarketOptions.MarketType") == "spot" else "on-demand"


@dataclass
class FakeAws:
    """moto's server plus the wrapper; ``url`` is what ``AWS_ENDPOINT_URL`` names.

    moto keeps its state in the process, shared by every server it runs: ``reset`` empties
    it for all of them."""

    errors: list[Injected] = field(default_factory=list)
    parameters: dict[str, str] = field(default_factory=dict)
    """SSM parameters under ``/aws`` the wrapper answers (name -> value)."""
    requests: list[Recorded] = field(default_factory=list)
    delay: dict[str, float] = field(default_factory=dict)
    """action -> seconds the wrapper waits before answering it."""
    after_launch: Any = None
    """Called once a launch's answer has been sent (e.g. to kill the start job there)."""
    on_launch: Any = None
    """Called when a launch request arrives, before it is answered (a launch in flight)."""

    def __post_init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._clients: dict[str, Any] = {}
        self._image = ""

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeAws:
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, host, port))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        self._moto.stop()

    def __enter__(self) -> FakeAws:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Back to an empty cloud: moto's own reset, nothing injected or recorded."""
        host, port = self._moto.get_host_and_port()
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request("POST", "/moto-api/reset")
        conn.getresponse().read()
        conn.close()
        with self._lock:
            self.errors.clear()
            self.after_launch = None
            self.on_launch = None
            self.parameters.clear()
            self.requests.clear()
            self.delay.clear()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self) -> dict[str, str]:
        """What a job's environment holds for boto3: the endpoint and dummy credentials."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }

    # -- what the tests ask -----------------------------------------------------------------
    def inject(self, code: str, **kwargs: Any) -> None:
        self.errors.append(Injected(code, **kwargs))

    def calls(self, action: str | None = None) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if action is None or r.action == action]

    def client(self, service: str = "ec2") -> Any:
        if service not in self._clients:
            self._clients[service] = self._new_client(service)
        return self._clients[service]

    def _new_client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def network(self, zones: int = 3) -> tuple[list[str], str]:
        """A VPC with one subnet per zone and a security group: (subnets, group)."""
        ec2 = self.client()
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        names = [f"{REGION}{c}" for c in "abcdef"[:zones]]
        subnets = [
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=z)["Subnet"][
                "SubnetId"
            ]
            for i, z in enumerate(names)
        ]
        group = ec2.create_security_group(GroupName="gpu-ci", Description="t", VpcId=vpc)
        return subnets, group["GroupId"]

    def image(self) -> str:
        """An AMI moto knows (its bundled list, which a reset keeps)."""
        if not self._image:
            images = self.client().describe_images(Owners=["amazon"])["Images"]
            self._image = str(sorted(i["ImageId"] for i in images)[0])
        return self._image

    def live(self, **tags: str) -> list[dict[str, Any]]:
        """Instances not terminated, optionally carrying ``tags``."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()]
        filters.append({"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]})
        answer = self.client().describe_instances(Filters=filters)
        return [i for r in answer["Reservations"] for i in r["Instances"]]

    def tagged(self, subnet: str, image: str, tags: dict[str, str], spot: bool = False) -> str:
        """A VM carrying ``tags`` at creation, as if a start had launched it."""
        extra: dict[str, Any] = {}
        if spot:
            extra["InstanceMarketOptions"] = {"MarketType": "spot"}
        answer = self.client().run_instances(
            ImageId=image,
            InstanceType="g5.xlarge",
            MinCount=1,
            MaxCount=1,
            SubnetId=subnet,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
            **extra,
        )
        return str(answer["Instances"][0]["InstanceId"])

    def reclaim_spot(self, instance_id: str) -> None:
        """AWS takes a spot VM back: terminated, with the state reason AWS records."""
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        instance = ec2_backends[ACCOUNT][REGION].get_instance(instance_id)
        instance.terminate()
        instance.state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination",
            "Server.SpotInstanceTermination",
        )

    def untagged(self, subnet: str, image: str) -> str:
        """A VM someone else launched (no tags of ours)."""
        answer = self.client().run_instances(
            ImageId=image, InstanceType="t3.micro", MinCount=1, MaxCount=1, SubnetId=subnet
        )
        return str(answer["Instances"][0]["InstanceId"])


def _handler(aws: FakeAws, host: str, port: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target = self.headers.get("X-Amz-Target", "")
            if target:  # JSON protocol (SSM)
                action = target.split(".")[-1]
                params = {k: str(v) for k, v in json.loads(body or b"{}").items()}
            else:
                form = parse_qs(body.decode(), keep_blank_values=True)
                params = {k: v[0] for k, v in form.items()}
                action = params.get("Action", "")
            record = Recorded(action, params, time.monotonic())
            with aws._lock:
                aws.requests.append(record)
            if action == "RunInstances" and aws.on_launch:
                aws.on_launch()
            if aws.delay.get(action):
                time.sleep(aws.delay[action])
            answer = self._own(action, params)
            if answer is None:
                answer = self._forward(body)
            record.answered = answer[0]
            self._send(*answer)
            if action == "RunInstances" and answer[0] == 200 and aws.after_launch:
                self.wfile.flush()
                aws.after_launch()

        def _own(self, action: str, params: dict[str, str]) -> tuple[int, bytes, str] | None:
            if action == "GetParameter" and params.get("Name", "").startswith("/aws/"):
                name = params["Name"]
                if name not in aws.parameters:
                    body = {"__type": "ParameterNotFound", "message": f"{name} not found"}
                    return 400, json.dumps(body).encode(), "application/x-amz-json-1.1"
                parameter = {"Name": name, "Type": "String", "Value": aws.parameters[name]}
                return 200, json.dumps({"Parameter": parameter}).encode(), "application/json"
            if action != "RunInstances":
                return None
            with aws._lock:
                for rule in aws.errors:
                    if rule.times <= 0:
                        continue
                    if rule.instance_type and rule.instance_type != params.get("InstanceType"):
                        continue
                    if rule.zone_subnet and rule.zone_subnet != params.get("SubnetId"):
                        continue
                    if rule.market and rule.market != market_of(params):
                        continue
                    rule.times -= 1
                    return STATUS.get(rule.code, 400), _error_xml(rule.code), "text/xml"
            return None

        def _forward(self, body: bytes) -> tuple[int, bytes, str]:
            conn = http.client.HTTPConnection(host, port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            headers["Host"] = f"{host}:{port}"
            conn.request("POST", self.path, body, headers)
            reply = conn.getresponse()
            data = reply.read()
            kind = reply.getheader("Content-Type") or "text/xml"
            conn.close()
            return reply.status, data, kind

        def _send(self, status: int, data: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
