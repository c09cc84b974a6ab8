#include "text/chat_template.h"

#include <ctime>

#include "text/jinja/jinja_interpreter.h"
#include "text/jinja/jinja_parser.h"
#include "text/jinja/jinja_value.h"

namespace kvtier::text {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const jinja::Body> body, jinja::parse_template(source));
  return ChatTemplate(std::move(body));
}

template <class Json>
Result<std::string> ChatTemplate::render_json(const Json& context, const RenderOptions& options) const {
  if (!context.is_object()) return Status::InvalidArgument("chat template context must be a JSON object");
  jinja::RenderLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_steps = options.max_steps;
  limits.now_unix_seconds = options.now_unix_seconds >= 0 ? options.now_unix_seconds
                                                           : static_cast<int64_t>(std::time(nullptr));
  return jinja::render_template(*body_, jinja::from_json(context), limits);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context, const RenderOptions& options) const {
  return render_json(context, options);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_json(context, options);
}

}  // namespace kvtier::text
