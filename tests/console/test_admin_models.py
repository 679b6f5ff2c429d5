"""An administrator's Models pages in a real browser, checked against the objects on the real API server:
import an external service (key written once, never shown), publish, rename and remove its model names,
publish and unpublish an LLMInferenceService, and the API server's refusals shown next to the field."""

from __future__ import annotations

import asyncio
import base64

from kubernetes_asyncio import client as k8s

from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld

UPSTREAM = "upstream-secret-value-42"


async def _get(world: ConsoleWorld, plural: str, ns: str, name: str) -> dict[str, object] | None:
    api = k8s.CustomObjectsApi(world.stack.api)
    try:
        obj: dict[str, object] = await api.get_namespaced_custom_object("maas.opendatahub.io", "v1alpha1", ns,
                                                                        plural, name)
        return obj
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def _until_gone(world: ConsoleWorld, plural: str, ns: str, name: str, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while await _get(world, plural, ns, name) is not None:
        assert asyncio.get_running_loop().time() < deadline, f"{plural} {ns}/{name} was never deleted"
        await asyncio.sleep(0.2)


def import_service(browser: Browser, name: str, ns: str, endpoint: str, key: str = "", *, provider: str = "",
                   api_format: str = "") -> None:
    browser.go("/admin/models/services/new")
    browser.fill("name", name)
    browser.fill("namespace", ns)
    browser.fill("endpoint", endpoint)
    if key:
        browser.fill("upstream_key", key)
    if provider:
        browser.fill("provider", provider)
    if api_format:
        browser.select("api_format", api_format)
    browser.button("Create")


async def test_import_a_service_and_publish_rename_remove_its_models(world: ConsoleWorld, browser: Browser) -> None:
    ns = await objects.namespace(world, "svc")
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    import_service(browser, "acme", ns, f"{world.stack.model_url}/v1", UPSTREAM)
    await browser.until(lambda: browser.path == f"/admin/models/services/{ns}/acme/publish", what="publish form")
    # the provider refuses this key for its model list: no suggestion, the reason, and typing still works
    assert "No model list from the provider (the provider answered" in browser.text("main")
    assert not browser.all("datalist#provider-models")
    browser.fill("models-0-name", "gpt-x")
    browser.fill("models-1-name", "fast")
    browser.fill("models-1-target", "granite")
    browser.screenshot("admin-publish-models")
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/models/services", what="saved")
    row = browser.one(f"#model-services tr[data-service='{ns}/acme']").text
    assert "gpt-x" in row and "fast (provider: granite)" in row and "stored in Secret" in row
    browser.screenshot("admin-model-services")
    assert UPSTREAM not in browser.source()

    secret = await k8s.CoreV1Api(world.stack.api).read_namespaced_secret("maas-service-acme", ns)
    assert base64.b64decode(secret.data["api-key"]).decode() == UPSTREAM
    fast = await _get(world, "externalmodels", ns, "fast")
    assert fast is not None and fast["spec"] == {  # type: ignore[index]
        "provider": "openai", "endpoint": f"{world.stack.model_url}/v1", "targetModel": "granite",
        "credentialRef": {"name": "maas-service-acme", "key": "api-key"}}
    ref = await _get(world, "maasmodelrefs", ns, "fast")
    assert ref is not None and ref["spec"]["modelRef"] == {"kind": "ExternalModel", "name": "fast"}  # type: ignore[index]

    # Both appear among the published models, as External, and become Ready.
    def published() -> str:
        browser.go("/admin/models?type=ExternalModel")
        return browser.text("#published-models")

    await browser.until(lambda: f"{ns}" in published() and "Ready" in browser.one(
        f"tr[data-model='{ns}/fast']").text, what="published and ready")
    browser.screenshot("admin-published-models")
    browser.go("/admin/models?type=LLMInferenceService")
    assert ns not in browser.text("#published-models")

    # Rename fast -> quick and remove gpt-x.
    browser.go(f"/admin/models/services/{ns}/acme/publish")
    names = {browser.one(f"#models-{i}-name").get_attribute("value"): i for i in range(2)}
    browser.fill(f"models-{names['fast']}-name", "quick")
    browser.click(f"#models-{names['gpt-x']}-remove")
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/models/services", what="saved")
    assert await _get(world, "maasmodelrefs", ns, "quick") is not None
    await _until_gone(world, "maasmodelrefs", ns, "fast")
    await _until_gone(world, "externalmodels", ns, "fast")
    await _until_gone(world, "maasmodelrefs", ns, "gpt-x")
    quick = await _get(world, "externalmodels", ns, "quick")
    assert quick is not None and quick["spec"]["targetModel"] == "granite"  # type: ignore[index]


async def test_field_errors_come_from_the_api_types_and_the_api_server(world: ConsoleWorld,
                                                                      browser: Browser) -> None:
    ns = await objects.namespace(world, "err")
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    import_service(browser, "dup", ns, "ftp://nowhere")
    await browser.until(lambda: browser.all("#endpoint-error"), what="endpoint error")
    assert "absolute http(s) URL" in browser.text("#endpoint-error")
    assert browser.one("#endpoint").get_attribute("aria-invalid") == "true"
    import_service(browser, "dup", ns, "https://api.example.com/v1")
    await browser.until(lambda: browser.path.endswith("/publish"))
    import_service(browser, "dup", ns, "https://api.example.com/v1", "k")
    await browser.until(lambda: browser.all("#name-error"), what="name error")
    assert "already exists" in browser.text("#name-error")  # the API server's AlreadyExists
    assert browser.one("#upstream_key").get_attribute("value") == ""  # a key is never echoed back
    import_service(browser, "nons", "no-such-namespace-x", "https://api.example.com/v1")
    await browser.until(lambda: browser.all("#namespace-error"), what="namespace error")
    assert "not found" in browser.text("#namespace-error")
    browser.screenshot("admin-import-errors")


async def test_rbac_still_decides_for_console_admins(world: ConsoleWorld, browser: Browser) -> None:
    """vic is in an administrator group of the console but has no RBAC: the API server refuses."""
    ns = await objects.namespace(world, "rbac")
    browser.sign_in_with_token(world.token("vic"))
    await browser.until(lambda: "vic" in browser.text("header"))
    import_service(browser, "nope", ns, "https://api.example.com/v1")
    await browser.until(lambda: browser.all("#name-error, .field-error"), what="refusal")
    assert "forbidden" in browser.text().lower()
    browser.go("/admin/models")
    assert "forbidden" in browser.text().lower()


async def test_publish_and_unpublish_an_inference_service(world: ConsoleWorld, browser: Browser) -> None:
    ns = await objects.namespace(world, "llm")
    await objects.apply(world, [{"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
                                 "metadata": {"name": "granite", "namespace": ns}, "spec": {}}])
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    browser.go("/admin/models/publish")
    browser.select("service", f"{ns}/granite")
    browser.fill("display_name", "Granite <b>8B</b>")
    browser.fill("description", "In-cluster model")
    browser.button("Publish")
    await browser.until(lambda: browser.path == "/admin/models", what="published")
    row = browser.one(f"tr[data-model='{ns}/granite']").text
    assert "Inference Service: granite" in row and "Granite <b>8B</b>" in row  # escaped, shown as text
    ref = await _get(world, "maasmodelrefs", ns, "granite")
    assert ref is not None and ref["metadata"]["annotations"]["openshift.io/display-name"] == "Granite <b>8B</b>"  # type: ignore[index]

    sub = f"uses-{objects.suffix()}"
    await objects.apply(world, objects.access(world, sub, ns, ["granite"], ["bob"], [(1000, "1m")]))
    browser.go(f"/admin/models/{ns}/granite/unpublish")
    assert sub in browser.text("#unpublish-warning")
    browser.screenshot("admin-unpublish-warning")
    browser.button("Unpublish anyway")
    await browser.until(lambda: browser.path == "/admin/models", what="unpublished")
    await _until_gone(world, "maasmodelrefs", ns, "granite")  # the controller's finalizer runs first


async def test_every_external_model_is_listed_not_only_the_imported_ones(world: ConsoleWorld,
                                                                         browser: Browser) -> None:
    """An ExternalModel applied with kubectl (the sample's, GitOps) is shown beside the console's imports, with
    its endpoint, provider model, credential Secret (its name only) and phase."""
    ns = await objects.namespace(world, "kubectl")
    await objects.apply(world, objects.external_model(world, ns, "applied", target="granite"))
    await objects.apply(world, [{"apiVersion": objects.MAAS, "kind": "ExternalModel",
                                 "metadata": {"name": "keyless", "namespace": ns},
                                 "spec": {"provider": "openai", "endpoint": "https://api.example.com/v1",
                                          "targetModel": "gpt-x", "credentialRef": {"name": "missing-key"}}}])
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))

    def row(name: str) -> str:
        browser.go("/admin/models/services")
        rows = browser.all(f"#other-external-models tr[data-external-model='{ns}/{name}']")
        return rows[0].text if rows else ""

    await browser.until(lambda: "Ready" in row("applied"), what="the applied model listed as Ready")
    applied = row("applied")
    assert "granite" in applied and "Secret applied-key" in applied and world.stack.model_url in applied
    await browser.until(lambda: "Failed" in row("keyless"), what="a broken model listed with its phase")
    assert "missing-key" in row("keyless")  # the reason, e.g. "Secret missing-key not found"
    assert world.stack.options.upstream_key not in browser.source()  # a Secret's name, never its data
    assert not browser.all(f"#model-services tr[data-service^='{ns}/']")  # not mistaken for an import



async def test_a_provider_the_console_may_not_call_is_imported_without_a_model_list(world: ConsoleWorld,
                                                                                   browser: Browser) -> None:
    """The listing is asked from the console's network position: the data plane's destination rule applies (no
    cloud metadata, no API server, no other namespace's Service), and a refusal only costs the suggestion."""
    ns = await objects.namespace(world, "nolist")
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    for name, endpoint, says in (("meta", "http://169.254.169.254/v1", "link-local"),
                                 ("api", "https://kubernetes.default.svc/v1", "Kubernetes API server"),
                                 ("other", "http://secret-svc.kube-system.svc:8080/v1", "Service of namespace")):
        import_service(browser, name, ns, endpoint, UPSTREAM)
        await browser.until(lambda n=name: browser.path == f"/admin/models/services/{ns}/{n}/publish",
                            what=f"{name} imported")
        assert not browser.all("datalist#provider-models"), name
        assert "No model list from the provider" in browser.text("main") and says in browser.text("main"), name
    assert UPSTREAM not in browser.source()


async def test_importing_asks_the_provider_for_its_model_names_and_offers_them(world: ConsoleWorld,
                                                                             browser: Browser) -> None:
    """The key is in hand only while the import form is submitted (it is never read back from its Secret), so the
    provider is asked then; its names are kept on the Secret's metadata and offered where a name is typed."""
    ns = await objects.namespace(world, "list")
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    import_service(browser, "listed", ns, f"{world.stack.model_url}/v1", world.stack.options.upstream_key)
    await browser.until(lambda: browser.path == f"/admin/models/services/{ns}/listed/publish", what="publish form")
    offered = {o.get_attribute("value") for o in browser.all("datalist#provider-models option")}
    assert offered == {"gpt-x", "granite"}, (offered, browser.text("main")[:300])
    assert "lists 2 models" in browser.text("main")
    assert browser.one("#models-0-target").get_attribute("list") == "provider-models"
    browser.screenshot("admin-publish-provider-models")
    assert world.stack.options.upstream_key not in browser.source()
    browser.go(f"/admin/models/services/{ns}/listed/publish")  # kept: offered again later, from the metadata
    assert {o.get_attribute("value") for o in browser.all("datalist#provider-models option")} == offered


async def test_an_anthropic_format_service_is_asked_with_its_own_headers_and_publishes_messages_models(
        world: ConsoleWorld, browser: Browser) -> None:
    """A Messages (Anthropic) provider: the console lists its models the way the gateway will call it (the key
    in x-api-key, with anthropic-version; the test model's Anthropic side refuses Bearer), and the published
    ExternalModels say `apiFormat: messages`, so their routes translate. A format the API does not know is
    refused next to the field."""
    ns = await objects.namespace(world, "anth")
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    browser.go("/admin/models/services/new")
    browser.fill("name", "forged")
    browser.fill("namespace", ns)
    browser.fill("endpoint", f"{world.stack.model_url}/v1")
    browser.run("const o = document.createElement('option'); o.value = 'bedrock'; "
                "document.getElementById('api_format').appendChild(o)")
    browser.select("api_format", "bedrock")
    browser.button("Create")
    await browser.until(lambda: browser.all("#api_format-error"), what="unknown format refused")
    secrets = await k8s.CoreV1Api(world.stack.api).list_namespaced_secret(ns)
    assert [x.metadata.name for x in secrets.items if x.metadata.name == "maas-service-forged"] == []

    import_service(browser, "claude", ns, f"{world.stack.model_url}/v1", world.stack.options.upstream_key,
                   provider="anthropic", api_format="messages")
    await browser.until(lambda: browser.path == f"/admin/models/services/{ns}/claude/publish", what="publish form")
    offered = {o.get_attribute("value") for o in browser.all("datalist#provider-models option")}
    assert offered == {"gpt-x", "granite"}, (offered, browser.text("main")[:300])
    browser.fill("models-0-name", "sonnet")
    browser.fill("models-0-target", "gpt-x")
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/models/services", what="saved")
    sonnet = await _get(world, "externalmodels", ns, "sonnet")
    assert sonnet is not None and sonnet["spec"]["apiFormat"] == "messages"  # type: ignore[index]
    assert sonnet["spec"]["provider"] == "anthropic"  # type: ignore[index]
    assert world.stack.options.upstream_key not in browser.source()
