#include "text/chat_template.h"

#include <ctime>

#include "text/jinja/jinja_interpreter.h"
#include "text/jinja/jinja_parser.h"
#include "text/jinja/jinja_value.h"

namespace kvtier::text {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const jinja::Body> body, jinja::parse_template(source));
  return ChatTemplate(std::move(body), source.find("tools") != std::string_view::npos);
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

Result<std::string> ChatTemplate::render_chat(const ChatInput& chat, std::string_view bos_token,
                                              std::string_view eos_token, const RenderOptions& options) const {
  if (!chat.tools.is_null() && !reads_tools_)
    return Status::Unimplemented("this chat template does not support tools (it never reads `tools`); "
                                   "the request's tools would be dropped");
  if (!chat.kwargs.is_object()) return Status::InvalidArgument("chat_template_kwargs must be an object");
  nlohmann::ordered_json context = {{"messages", chat.messages},
                                    {"tools", chat.tools},
                                    {"documents", nullptr},
                                    {"add_generation_prompt", chat.add_generation_prompt},
                                    {"bos_token", bos_token},
                                    {"eos_token", eos_token}};
  for (const auto& [key, value] : chat.kwargs.items()) {
    if (key == "messages" || key == "tools")
      return Status::InvalidArgument("chat_template_kwargs may not set '" + key + "'");
    context[key] = value;
  }
  return render(context, options);
}

}  // namespace kvtier::text
