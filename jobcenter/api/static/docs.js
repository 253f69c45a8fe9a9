// The interactive API page: Swagger UI over the OpenAPI document beside it. A file of its
// own, not an inline script, so the content policy can refuse every inline script.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
  });
});
