"""Names for JSON-shaped values: Kubernetes manifests, XCom payloads, API answers.

`dict[str, Any]` said "anything, unchecked"; `JsonObject` says "plain JSON data read by
key", with values typed `object`: a reader takes them apart with a record's
`from_payload` (tfjob/records/) or by the manifest's own shape, never by trusting `Any`.
"""

JsonObject = dict[str, object]
