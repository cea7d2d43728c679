//! The Controls page (admin): pausing a kind there holds that kind's new work in the API
//! (`GET /queues` says paused; an export submitted meanwhile stays queued with phase
//! `paused`), and resuming it there lets the work run.

use context_jobs::contract::ContextOperationState;

use super::UiServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_a_kind_on_the_controls_page() {
    let ui = UiServer::start(&[]).await;
    ui.fx.seed("held", 20).await;
    let run = ui.scenario("controls", &[]).await;
    // The export the scenario submitted while the kind was paused ran after the resume.
    let id = run.result["heldOperationId"].as_str().expect("the scenario names the held export");
    let op = ui.api().wait_terminal(id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    let (status, queues) = ui.admin().get("/internal/v1/context/queues").await;
    assert_eq!(status, 200, "{queues}");
    assert!(!queues.to_string().contains("\"paused\":true"), "nothing is left paused: {queues}");
}
